"""The `cronwheel` command (`main`; see cronwheel.cli.main for the exit codes and how to add a
subcommand module).

    main.py      the parser, the exit codes, main()
    flags.py     what the API commands share: connection flags, the Client, argument types
    format.py    how the API commands print (tables, --json)
    schedule.py, api.py, explain.py, apply.py, webhook.py, tenant.py, console.py
                 the command groups, each over the Client
    commands.py  the server commands (migrate, dev, node, worker, secrets, token new --offline):
                 the only module of cli/ that imports cronwheel.cluster or cronwheel.storage
"""

from cronwheel.cli.main import main

__all__ = ["main"]
