"""The gateway's own ceiling (``benchmarks/gateway.py``'s raw-load passes, its ``raw_*``
figures and ``--ceiling-only``): the raw load against gateways whose model is the raw upstream
(``gateway_load``), on each event loop, with the bare aiohttp floors."""

from __future__ import annotations

import os
from typing import Any

from gateway_load import RawLoad
from gateway_servers import Servers, run_passes, stored_calls, summarize


def raw_ceiling(raw_port: int, raw_pid: int, loops: list[str], n: int, rounds: int,
                clients: int, conns: int, store: bool, floor: bool,
                no_store_too: bool = False) -> dict[str, Any]:
    """The gateway's own ceiling: the raw load (``gateway_load``: keep-alive sockets, a
    prebuilt request, ``clients`` processes of ``conns`` connections) against a gateway whose
    model is the raw upstream, for each event loop in ``loops``, with (``floor``) a bare aiohttp
    hello server and a bare aiohttp proxy to the raw upstream on the same loop; their passes
    alternate round by round, figures are medians over ``rounds``. Each gateway stores every
    call (``store``) and the count stored is checked against the count served;
    ``no_store_too`` adds, on the first loop, the same gateway storing nothing
    (``raw_gateway_no_store_*``: what durability costs per request)."""
    loads: dict[tuple[str, str], tuple[RawLoad, dict[str, int]]] = {}
    stores: dict[str, str] = {}
    with Servers() as s:
        loads[("direct", "-")] = (s.raw_load(raw_port, "direct", clients, conns),
                                  {"upstream": raw_pid})
        gateways = [("gateway", loop, store) for loop in loops]
        if no_store_too:
            gateways.insert(1, ("gateway_no_store", loops[0], False))
        for target, loop, stored in gateways:
            where = os.path.join(s.tmp.name, f"{target}-{loop}") if stored else None
            if where is not None:
                os.mkdir(where)
                stores[loop] = where
            port, token, gw_pid = s.gateway(raw_port, where, conns * clients, loop)
            loads[(target, loop)] = (s.raw_load(port, token, clients, conns),
                                     {"server": gw_pid, "upstream": raw_pid})
            if target != "gateway":
                continue
            for kind in ("hello", "proxy_raw") if floor else ():
                fport, fpid = s.floor(kind, raw_port, loop)
                loads[(kind, loop)] = (s.raw_load(fport, "x", clients, conns),
                                       {"server": fpid, "upstream": raw_pid})
        warm = max(n // 4, clients * conns)
        got = run_passes(loads, n, rounds, warm)
        out: dict[str, Any] = {"raw_requests": n, "raw_rounds": rounds, "raw_clients": clients,
                               "raw_connections": conns * clients}
        for (target, loop), runs in got.items():
            name = "raw_direct" if target == "direct" else (
                "raw_gateway_no_store" if target == "gateway_no_store" else f"raw_{target}_{loop}")
            # a gateway has one event loop: its ceiling on a core alone
            out.update(summarize(name, runs, ceiling=target.startswith("gateway")))
        s.stop()
        served = warm // clients * clients + rounds * (n // clients * clients)
        for loop, where in stores.items():
            out[f"raw_gateway_{loop}_stored_calls"] = stored_calls(where)
            out[f"raw_gateway_{loop}_served_calls"] = served
        return out


def raw_loops(arg: str | None) -> list[str]:
    """``--raw-loops``'s event loops (default: asyncio, and uvloop when installed)."""
    if arg is not None:
        return arg.split(",")
    loops = ["asyncio"]
    try:
        import uvloop  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
        loops.append("uvloop")
    except ImportError:
        pass
    return loops
