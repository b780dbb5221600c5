"""The one exception type the CLI turns into a clear message and exit code 2.

Every room raises a subclass of `UserError` for bad input (a spec that does not validate, an
unknown id, an illegal transition). The CLI prints `str(err)` and exits 2 without a traceback.
Anything else is a bug and keeps its traceback. This module imports nothing, so every room
(checkpoint/ included) may use it.
"""


class UserError(Exception):
    """Bad input from the operator: print the message, exit 2, change nothing."""

    exit_code = 2
