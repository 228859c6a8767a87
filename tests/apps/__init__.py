"""Small worker applications that the process tests run with the real `lease-worker` command."""
