"""The demo: `manage.py demo` seeds simulated teams, hosts and history and runs live simulated
agents beside the web server. Everything it stores is marked simulated."""
