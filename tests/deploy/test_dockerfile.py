"""The Dockerfile checked statically, in seconds (tests/deploy/test_image.py builds and runs it)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib

import pytest
from deploy_support import REPO, assert_valid_cascade_invocation, dockerignore_excludes, parse_dockerfile

DOCKERFILE = REPO / "Dockerfile"


@pytest.fixture(scope="module")
def dockerfile():
    return parse_dockerfile(DOCKERFILE)


def _stage(instructions, name: str):
    found = [i for i in instructions if i.stage == name]
    assert found, f"no stage {name!r}"
    return found


def _last(instructions, stage: str, keyword: str):
    """The instruction in effect for a stage, following its FROM chain to parent stages."""
    while True:
        own = [i for i in instructions if i.stage == stage and i.keyword == keyword]
        if own:
            return own[-1]
        parent = next(i for i in instructions if i.stage == stage and i.keyword == "FROM").args.split()[0]
        if not any(i.stage == parent for i in instructions):
            return None
        stage = parent


def test_base_image_is_python_311_slim_pinned_to_an_exact_version(dockerfile) -> None:
    global_args, instructions = dockerfile
    bases = {i.args.split()[0] for i in instructions if i.keyword == "FROM"}
    stages = {i.stage for i in instructions}
    external = {b for b in bases if b not in stages}
    assert external == {"${PYTHON_IMAGE}"}
    pinned = r"python:3\.11\.\d+-slim(-bookworm)?(@sha256:[0-9a-f]{64})?"
    assert re.fullmatch(pinned, global_args["PYTHON_IMAGE"])


def test_is_multi_stage_with_gateway_as_default_and_a_demo_target(dockerfile) -> None:
    _, instructions = dockerfile
    stages = [i.stage for i in instructions if i.keyword == "FROM"]
    assert len(stages) >= 3
    assert stages[-1] == "gateway"  # `docker build .` builds the last stage
    assert "demo" in stages
    # The runtime stages carry no compilers: they copy the built virtualenv from another stage.
    runtime_from = _stage(instructions, "runtime")[0].args.split()[0]
    assert runtime_from == "${PYTHON_IMAGE}"
    runtime = _stage(instructions, "runtime")
    assert not any(i.keyword == "RUN" and "apt-get install" in i.args for i in runtime)


def _stage_chain(instructions, stage: str) -> list[str]:
    """The stage and its parents, following FROM."""
    chain = [stage]
    while True:
        parent = _stage(instructions, chain[-1])[0].args.split()[0]
        if not any(i.stage == parent for i in instructions):
            return chain
        chain.append(parent)


@pytest.mark.parametrize("stage", ["gateway", "demo"])
def test_each_served_target_carries_exactly_one_virtualenv(dockerfile, stage: str) -> None:
    _, instructions = dockerfile
    copies = [
        i
        for i in instructions
        if i.stage in _stage_chain(instructions, stage)
        and i.keyword == "COPY"
        and i.args.split()[-1].rstrip("/") == "/opt/cascade"
    ]
    assert len(copies) == 1, [c.args for c in copies]  # a second copy would add a second layer of it


def _requirements_commands(instructions, stage: str) -> list[str]:
    """The `python -c` programs of a stage that print the requirements it installs."""
    programs = []
    for run in (i for i in instructions if i.stage == stage and i.keyword == "RUN" and "tomllib" in i.args):
        words = shlex.split(run.args)
        programs.append(words[words.index("-c") + 1])
    return programs


def test_the_gateway_image_installs_only_the_core_and_the_gateway_extra(dockerfile) -> None:
    _, instructions = dockerfile
    gateway_copy = next(i for i in _stage(instructions, "gateway") if i.keyword == "COPY")
    venv_stage = gateway_copy.flags_and_words()[0]["from"]
    chain = _stage_chain(instructions, venv_stage)
    programs = [p for stage in chain for p in _requirements_commands(instructions, stage)]
    assert len(programs) == 1
    # Run the Dockerfile's own program on the real pyproject.toml.
    printed = subprocess.run(
        [sys.executable, "-c", programs[0]], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert printed == project["dependencies"] + project["optional-dependencies"]["gateway"]
    installs = " ".join(i.args for stage in chain for i in _stage(instructions, stage) if i.keyword == "RUN")
    assert "pip install --no-deps ." in installs  # the project itself adds no dependency
    # The final virtualenv has no installers.
    assert re.search(r"pip uninstall -y( -q)? pip setuptools", installs)


def test_every_copy_source_exists_and_is_in_the_build_context(dockerfile) -> None:
    _, instructions = dockerfile
    copies = [i for i in instructions if i.keyword in ("COPY", "ADD")]
    assert copies
    for copy in copies:
        flags, words = copy.flags_and_words()
        if "from" in flags:
            continue
        for source in words[:-1]:
            assert (REPO / source).exists(), f"line {copy.line}: COPY source {source} does not exist"
            assert not dockerignore_excludes(source), f"line {copy.line}: {source} is in .dockerignore"


def test_every_package_of_the_project_is_copied_into_the_build(dockerfile) -> None:
    _, instructions = dockerfile
    copied = {w.rstrip("/") for i in instructions if i.keyword == "COPY" for w in i.flags_and_words()[1][:-1]}
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    for pattern in packages["include"]:
        assert pattern.rstrip("*") in copied


@pytest.mark.parametrize("stage", ["gateway", "demo"])
def test_runs_as_a_non_root_user(dockerfile, stage: str) -> None:
    _, instructions = dockerfile
    user = _last(instructions, stage, "USER")
    assert user is not None, f"stage {stage} sets no USER"
    name = user.args.split(":")[0]
    assert name not in ("root", "0")


@pytest.mark.parametrize("stage", ["gateway", "demo"])
def test_healthcheck_probes_healthz_with_python(dockerfile, stage: str) -> None:
    _, instructions = dockerfile
    check = _last(instructions, stage, "HEALTHCHECK")
    command = check.exec_form()
    assert command[0] == "python"  # slim images have no curl
    assert "/healthz" in command[-1]
    compile(command[-1], "<healthcheck>", "exec")


def test_entrypoint_is_the_project_console_script(dockerfile) -> None:
    _, instructions = dockerfile
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    for stage in ("gateway", "demo"):
        entrypoint = _last(instructions, stage, "ENTRYPOINT").exec_form()
        assert entrypoint == ["cascade"] and "cascade" in scripts


def test_gateway_cmd_is_cascade_serve_on_the_healthchecked_port(dockerfile) -> None:
    _, instructions = dockerfile
    cmd = _last(instructions, "gateway", "CMD").exec_form()
    assert cmd[0] == "serve"
    assert_valid_cascade_invocation(cmd)
    port = cmd[cmd.index("--port") + 1]
    assert f":{port}/healthz" in _last(instructions, "gateway", "HEALTHCHECK").exec_form()[-1]
    assert any(i.keyword == "EXPOSE" and port in i.args.split() for i in instructions)
    config = cmd[cmd.index("--config") + 1]
    config_dir = config.rsplit("/", 1)[0] + "/"
    copied = [i for i in instructions if i.keyword == "COPY" and i.args.endswith(config_dir)]
    assert copied, f"{config} is not baked into the image"


def test_demo_target_installs_and_serves_the_local_pool(dockerfile) -> None:
    _, instructions = dockerfile
    runs = " ".join(i.args for i in instructions if i.keyword == "RUN")
    assert "cascade models install" in runs
    assert_valid_cascade_invocation(["models", "install"])
    assert_valid_cascade_invocation(_last(instructions, "demo", "CMD").exec_form())


def test_the_demo_image_builds_llama_server_portable_and_checks_it_on_an_older_cpu(dockerfile) -> None:
    """A native build (-march=native) made on a new build host dies with SIGILL on an older node:
    the image's install is --portable, which also smoke-tests it on an emulated older CPU (qemu-user)."""
    _, instructions = dockerfile
    chain = _stage_chain(instructions, "demo-build")
    runs = [i.args for i in instructions if i.stage in chain and i.keyword == "RUN"]
    installs = [
        words for run in runs for words in _cascade_commands(run) if words[1:3] == ["models", "install"]
    ]
    assert installs, "the demo image installs no local model pool"
    for words in installs:
        assert "--portable" in words, f"`{' '.join(words)}` builds llama-server native for the build host"
        assert_valid_cascade_invocation(words[1:])
    assert any(re.search(r"apt-get install [^&]*\bqemu-user\b", run) for run in runs), (
        "no qemu-user to emulate"
    )


def _cascade_commands(run: str) -> list[list[str]]:
    """The `cascade ...` commands of a RUN, its shell words split at the operators (&&, ;, |)."""
    lexer = shlex.shlex(run, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for word in lexer:
        if word in {"&&", ";", "||", "|", "&"}:
            commands.append([])
        else:
            commands[-1].append(word)
    return [words for words in commands if words[:1] == ["cascade"]]


def test_hadolint_finds_nothing_to_fix() -> None:
    import subprocess

    from deploy_support import require_tool

    result = subprocess.run(
        [require_tool("hadolint"), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
