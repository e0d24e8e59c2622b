"""The command line: wiring only. Errors become messages at one boundary (``boundary``)."""
