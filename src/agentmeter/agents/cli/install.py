"""Install recipes for agent CLIs: one shared runtime layer per language, one layer per CLI.

Layers are cached by the digest of the chain below them, so every Node CLI starts from the very
same ``NODE_RUNTIME`` text (and every Python CLI from ``PYTHON_RUNTIME``): on one task
environment the runtime layer is built once and shared by all CLIs of that language.
Installs go under ``/opt/agentmeter/<cli>-<version>`` and are kept small (no caches, no docs).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from agentmeter.paths import cache_dir
from agentmeter.sandbox.spec import AGENT_GID, AGENT_UID, AGENT_USER, LayerSpec
from agentmeter.sandbox.trust import host_ca_bundle

INSTALL_ROOT = "/opt/agentmeter"

NODE_RUNTIME = LayerSpec(kind="script", independent=True,
                         label="agent runtime: node (Debian nodejs + npm)", source="""\
# agentmeter agent runtime: node
export DEBIAN_FRONTEND=noninteractive
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nodejs npm ca-certificates >/dev/null
  rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
fi
node --version
""")

PYTHON_RUNTIME = LayerSpec(kind="script", independent=True,
                           label="agent runtime: python (Debian python3 + venv)",
                           source="""\
# agentmeter agent runtime: python
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates >/dev/null
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
python3 --version
""")


def registry_trust() -> Path | None:
    """A build-context directory holding the host's CA bundle as ``ca.crt``.

    The install layers reach npm/PyPI with the trust roots of the host that builds them (a
    TLS-inspecting proxy's CA is in the host bundle, not in the Debian base). The bundle is in
    the layer's context, so it is part of the cache key and removed after the build step.
    """
    data = host_ca_bundle()
    if data is None:
        return None
    d = cache_dir() / "agent-install-trust"
    target = d / "ca.crt"
    if not target.is_file() or target.read_bytes() != data:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".ca.crt.{os.getpid()}"
        tmp.write_bytes(data)
        os.replace(tmp, target)
    return d


# the install scripts run in the context directory when there is one
_TRUST_ENV = """\
if [ -f ca.crt ]; then
  export NODE_EXTRA_CA_CERTS="$PWD/ca.crt" PIP_CERT="$PWD/ca.crt" SSL_CERT_FILE="$PWD/ca.crt"
fi
"""


def install_dir(name: str, version: str) -> str:
    return f"{INSTALL_ROOT}/{name}-{version}"


def npm_layer(name: str, package: str, version: str) -> LayerSpec:
    prefix = install_dir(name, version)
    return LayerSpec(kind="script", independent=True, label=f"agent {name} {version} (npm {package})",
                     context=registry_trust(), source=f"""\
# agentmeter agent install: npm {package}@{version}
{_TRUST_ENV}export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
npm install -g --no-audit --no-fund --loglevel=error --prefix {prefix} {package}@{version}
npm cache clean --force >/dev/null 2>&1 || true
rm -rf /root/.npm
chmod -R a+rX {prefix}
""")


def pip_layer(name: str, requirements: list[str], version: str, python: str = "python3") -> LayerSpec:
    prefix = install_dir(name, version)
    reqs = " ".join(f"'{r}'" for r in requirements)
    return LayerSpec(kind="script", independent=True,
                     label=f"agent {name} {version} (PyPI {requirements[0]})",
                     context=registry_trust(), source=f"""\
# agentmeter agent install: PyPI {reqs}
{_TRUST_ENV}{python} -m venv {prefix}
{prefix}/bin/pip install --quiet --no-cache-dir --disable-pip-version-check {reqs}
rm -rf /root/.cache
chmod -R a+rX {prefix}
""")


def commands_layer(name: str, version: str, commands: list[str], user: str,
                   context: Path | None) -> LayerSpec:
    """An agent file's install commands, run once into a cached layer (``set -e``: the first
    failing command fails the build), as root or as the agent user (then the install prefix
    is theirs; the build context, when there is one, is the directory they run in)."""
    prefix = install_dir(name, version)
    body = "\n".join(commands)
    if user == "root":
        script = f"mkdir -p {shlex.quote(prefix)}\n{body}\nchmod -R a+rX {shlex.quote(prefix)}\n"
    else:
        # the build context (the directory the commands run in) is root's: let them read it
        readable = "chmod -R a+rX .\n" if context is not None else ""
        script = (f"mkdir -p {shlex.quote(prefix)}\nchown {AGENT_UID}:{AGENT_GID} "
                  f"{shlex.quote(prefix)}\n{readable}"
                  f"setpriv --reuid={AGENT_UID} --regid={AGENT_GID} --clear-groups "
                  f"env HOME=/home/{AGENT_USER} bash -euc {shlex.quote(body)}\n")
    return LayerSpec(kind="script", independent=True, context=context,
                     label=f"agent {name} {version} (install commands)",
                     source=f"# agentmeter agent install: {name} {version}\nset -eu\n{script}")
