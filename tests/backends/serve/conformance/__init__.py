"""Conformance of `serve-sqs` with SQS, driven by real clients over both of SQS's protocols.

Every case runs twice: with current boto3/botocore (SQS's JSON protocol) and with boto3 given
SQS's last query-protocol service model (botocore 1.31.80's `sqs/2012-11-05/service-2.json`,
read from that release's wheel at test time: see conftest.py), which makes botocore speak the
query protocol (form-encoded `Action=`, XML answers) as botocore < 1.31.81 did.
"""
