"""What crosses the wire and what is written about it: request parsing, errors, the client exchange,
the facts of a request, log lines, reading an answer.
"""
