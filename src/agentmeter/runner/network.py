"""A trial's network, stated: its label (``extra["network"]``), where it came from
(``extra["network_source"]``) and, when a command failed for
lack of network, a status message that says so instead of the failure it led to: the hosts the
harness's proxy refused or could not reach (sandbox/proxy.py ``blocked``; ``extra["unreachable"]``)
named first, else what the tools printed."""

from __future__ import annotations

import re

from agentmeter.tasks.models import Task
from agentmeter.verify.protocol import Verdict

#: what tools print when the network is not there (curl, apt, pip/urllib3, glibc, git, wget)
#: and what the harness's proxy answers (sandbox/proxy.py: REFUSED_REASON)
_SIGNS = re.compile(
    r"could not resolve host:? *'?[\w.-]+'?|could not resolve '[\w.-]+'"
    r"|temporary failure (?:in name resolution|resolving '?[\w.-]+'?)"
    r"|failed to resolve '?[\w.-]+'?|name or service not known|no address associated with hostname"
    r"|network is unreachable|unable to resolve host address '?[\w.-]+'?"
    r"|forbidden by agentmeter allowlist|connect tunnel failed, response 403"
    r"|failed to connect to (?!127\.0\.0\.1|localhost)[\w.-]+ port \d+[^\n]{0,80}connection refused",
    re.IGNORECASE)
#: how much of the verifier's log is searched (its end)
_LOG_TAIL = 256 << 10


def _label(allow_internet: bool, allowed_hosts: tuple[str, ...]) -> str:
    if allow_internet:
        return "public"
    if allowed_hosts:
        return "allowlist: " + ", ".join(allowed_hosts)
    return "no-network"


def network_label(task: Task) -> str:
    """``no-network``, ``public`` or ``allowlist: a.com, b.org`` (Harbor's network_mode names)."""
    return _label(task.allow_internet, task.allowed_hosts)


def verifier_network_label(task: Task) -> str | None:
    """The verifier's network when it is not the agent's (``extra["verifier_network"]``), as
    :func:`network_label` names it: a separate verifier's, or that of a verifier sharing the
    agent's sandbox whose network is switched to it (``Task.verifier_network``); else None."""
    sep = task.separate_verifier or task.verifier_network
    if sep is None:
        return None
    label = _label(sep.allow_internet, sep.allowed_hosts)
    return None if task.separate_verifier is None and label == network_label(task) else label


def network_source(task: Task) -> str:
    """Where the trial's network came from (``extra["network_source"]``): ``task`` (it states
    its network) or ``run default`` (it states none: the run's ``--network-default``)."""
    return "run default" if task.network_default else "task"


def blocked_hosts(sandbox: object) -> dict[str, str]:
    """The hosts a sandbox's proxy refused or could not reach ("host:port" -> why), if it has
    one (sandbox/netsetup.py: ``SandboxNetwork.blocked``, kept after the sandbox stops)."""
    network = getattr(sandbox, "network", None)
    blocked = getattr(network, "blocked", None)
    return dict(blocked()) if callable(blocked) else {}


def unreachable_failure(task: Task, blocked: dict[str, dict[str, str]],
                        error: str | None) -> str | None:
    """The status message of a failed trial whose agent or tests tried to reach hosts the
    proxy refused or could not reach (``blocked``: who -> "host:port" -> why, e.g.
    ``{"the agent": {"astral.sh:443": "unreachable: cannot resolve astral.sh: …"}}``), naming
    them before the failure they led to; None when nothing was blocked."""
    parts = []
    for who, hosts in blocked.items():
        if not hosts:
            continue
        refused = [h for h, why in hosts.items() if why.startswith("refused")]
        lost = [h for h in hosts if h not in refused]
        said = []
        if lost:
            said.append(f"{who} tried to reach {', '.join(lost)}, which this machine cannot reach "
                        f"({hosts[lost[0]].removeprefix('unreachable: ')})")
        if refused:
            verifier = verifier_network_label(task) if who == "the tests" else None
            whose = "its verifier's network" if verifier else "the task's network"
            said.append(f"{who} tried to reach {', '.join(refused)}, which {whose} "
                        f"({verifier or network_label(task)}) does not admit")
        parts.append("; ".join(said))
    if not parts:
        return None
    message = "failed: " + "; ".join(parts)
    return f"{message}; then: {error}" if error else message


def _sign(text: str | None) -> str | None:
    m = _SIGNS.search(text or "")
    return m.group(0).strip() if m else None


def network_failure(task: Task, error: str | None, agent_error: str | None,
                    verdict: Verdict) -> str | None:
    """The status message of a failed trial whose agent or tests needed a network its sandbox
    does not have, naming the task's network mode; None when nothing shows that."""
    if task.allow_internet:
        return None
    verifier_public = task.verifier_network is not None and task.verifier_network.allow_internet
    who, sign = "the agent", _sign(agent_error)
    if sign is None:
        for art in verdict.artifacts:
            if art.kind == "verifier_output":
                try:
                    with art.path.open("rb") as f:
                        size = f.seek(0, 2)
                        f.seek(max(0, size - _LOG_TAIL))
                        sign = _sign(f.read().decode(errors="replace"))
                except OSError:
                    continue
                if sign:
                    who = "the tests"
                    break
    if sign is not None and who == "the tests" and verifier_public:
        return None  # the tests had the network (the sandbox's was switched for them)
    if sign is None:
        who, sign = "the trial", _sign(error)
    if sign is None:
        return None
    if task.allowed_hosts:
        has = ("reaches only its allowed hosts (network_mode = \"allowlist\": "
               + ", ".join(task.allowed_hosts) + ")")
    elif task.network_default:
        has = "has no network (the task states none and the run says --network-default none)"
    else:
        has = 'has no network (network_mode = "no-network")'
    message = f"failed: {who} needed the network ({sign!r}), but this task's sandbox {has}"
    return f"{message}; {error}" if error else message
