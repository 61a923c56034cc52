"""The PolicyLab client: `policylab` on the command line, `Client` from Python.

    from policylab_client import Client
    client = Client.from_config()              # what `policylab login` stored
    run = client.submit(open("grpo.yaml").read(), ["max_steps=20"], name="grpo")
    final = client.follow(run["id"], on_line=print)
"""

from policylab_client.api import ApiError, Client

__all__ = ["ApiError", "Client"]
