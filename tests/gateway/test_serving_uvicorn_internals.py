"""The uvicorn internals GatewayHttpProtocol overrides still have the shape it was written against.

``gateway/api/serving.py`` subclasses uvicorn's private httptools protocol: it overrides its connection
and parser callbacks and reads the request cycle's state. A uvicorn release that renames one of
them would break the head and body bounds silently (the override never called, or an attribute
error inside a callback); these checks fail first, and pyproject pins uvicorn to what they pass on.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from gateway.api.serving import GatewayHttpProtocol, gateway_http_protocol
from gateway.config.settings import LimitsConfig

# Each method the gateway overrides, with the parameters uvicorn calls it with.
OVERRIDDEN = {
    "connection_made": ["self", "transport"],
    "data_received": ["self", "data"],
    "on_message_begin": ["self"],
    "on_headers_complete": ["self"],
    "send_400_response": ["self", "msg"],
    "connection_lost": ["self", "exc"],
}
# Attributes of the protocol the gateway reads, and where uvicorn sets them.
PROTOCOL_ATTRIBUTES = {
    "__init__": {"loop", "logger", "transport", "headers", "cycle", "pipeline", "parser"},
    "connection_made": {"transport"},
    "on_message_begin": {"url", "headers"},
    "on_headers_complete": {"cycle"},
}
# Attributes of a request cycle the gateway reads.
CYCLE_ATTRIBUTES = {"scope", "more_body", "response_started", "response_complete"}


def _assigned_to_self(function: object) -> set[str]:
    """Names of the ``self.X = ...`` assignments in a function's source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))  # type: ignore[arg-type]
    return {
        target.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    }


@pytest.mark.parametrize("name", sorted(OVERRIDDEN))
def test_each_overridden_method_exists_in_uvicorn_with_the_same_parameters(name: str) -> None:
    assert name in vars(GatewayHttpProtocol), f"GatewayHttpProtocol no longer overrides {name}"
    parameters = list(inspect.signature(getattr(HttpToolsProtocol, name)).parameters)
    assert parameters == OVERRIDDEN[name]
    assert list(inspect.signature(getattr(GatewayHttpProtocol, name)).parameters) == OVERRIDDEN[name]


@pytest.mark.parametrize("method", sorted(PROTOCOL_ATTRIBUTES))
def test_the_protocol_attributes_the_gateway_reads_are_set_where_it_expects(method: str) -> None:
    missing = PROTOCOL_ATTRIBUTES[method] - _assigned_to_self(getattr(HttpToolsProtocol, method))
    assert not missing, f"HttpToolsProtocol.{method} no longer sets {sorted(missing)}"


def test_the_request_cycle_has_the_state_the_gateway_reads() -> None:
    missing = CYCLE_ATTRIBUTES - _assigned_to_self(RequestResponseCycle.__init__)
    assert not missing, f"RequestResponseCycle no longer sets {sorted(missing)}"


def test_a_parser_error_still_reaches_send_400_response() -> None:
    # The gateway answers a refused head (431) and malformed requests (OpenAI-shaped 400) from
    # send_400_response, which uvicorn must call when the parser raises.
    source = inspect.getsource(HttpToolsProtocol.data_received)
    assert re.search(r"except httptools\.HttpParserError:.*?self\.send_400_response\(", source, re.S)


def test_the_installed_uvicorn_is_within_the_pinned_range(repo_root: Path) -> None:
    document = tomllib.loads((repo_root / "pyproject.toml").read_text())
    (pin,) = [r for r in document["project"]["optional-dependencies"]["gateway"] if r.startswith("uvicorn")]
    match = re.fullmatch(r"uvicorn\[standard\]>=(\d+)\.(\d+),<(\d+)\.(\d+)", pin)
    assert match, pin
    low, high = (int(match[1]), int(match[2])), (int(match[3]), int(match[4]))
    installed = tuple(int(part) for part in version("uvicorn").split(".")[:2])
    assert low <= installed < high, (version("uvicorn"), pin)


def test_the_bounds_of_a_config_are_class_attributes_of_a_protocol_subclass() -> None:
    limits = LimitsConfig(header_timeout_s=3.5, body_timeout_s=7.0, max_header_bytes=9000, max_headers=12)
    protocol = gateway_http_protocol(limits)
    assert issubclass(protocol, GatewayHttpProtocol)
    bounds = (
        protocol.header_timeout_s,
        protocol.body_timeout_s,
        protocol.max_header_bytes,
        protocol.max_headers,
    )
    assert bounds == (3.5, 7.0, 9000, 12)
    assert GatewayHttpProtocol.max_headers == LimitsConfig().max_headers  # the base keeps the defaults
