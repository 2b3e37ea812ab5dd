"""The HTTP APIs the gateway speaks, one translation layer (an ``ApiEdge``) per API.

The cascade engine runs chat-completions stages only (the scorer reads their logprobs). An edge
turns its API's request into the request the engine runs and the engine's answer back into its
API's shape; ``gateway.api.endpoint.ApiEndpoint`` serves every edge with the same keys, spend,
routing, headers, metrics, logs and learning samples.
"""

from gateway.api.edges.base import ApiEdge, ChatStreamTranslator, OpenAIEdge, StreamTranslator, Translated

__all__ = ["ApiEdge", "ChatStreamTranslator", "OpenAIEdge", "StreamTranslator", "Translated"]
