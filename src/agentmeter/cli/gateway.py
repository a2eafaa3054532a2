"""``agentmeter gateway serve``: the metering gateway on its own, for any agent."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agentmeter.cli.common import err, fail

gateway_app = typer.Typer(help="The metering gateway on its own.", no_args_is_help=True)


@gateway_app.command("serve")
def gateway_serve(
    model: Annotated[str, typer.Option("--model", "-m", help="model every call goes to")],
    host: str = "127.0.0.1", port: int = 8080,
    models_file: Annotated[str | None, typer.Option(help="models TOML")] = None,
    prices: Annotated[list[str] | None, typer.Option(help="pricing snapshot TOML")] = None,
    max_usd: float | None = None, max_tokens: int | None = None, max_calls: int | None = None,
    out: Annotated[Path | None, typer.Option(help="append every call as JSON lines")] = None,
) -> None:
    """Meter any agent: serves Chat Completions, Responses, Messages and Gemini on HOST:PORT."""
    import asyncio
    import signal

    from agentmeter.gateway.localmodels import LocalModelError
    from agentmeter.gateway.metering import Budget
    from agentmeter.gateway.registry import ModelConfigError
    from agentmeter.gateway.server import Gateway
    from agentmeter.gateway.standalone import serve
    from agentmeter.pricing.snapshot import PricingError
    from agentmeter.runner.session import RunRequest, RunSetupError, models_and_prices

    try:
        registry, book = models_and_prices(RunRequest(models_file=models_file, prices=prices or []))
        # an unknown model, a missing key or price fails before anything listens
        Gateway(registry, book).check_model(model)
    except (RunSetupError, ValueError, PricingError) as e:
        raise fail(str(e)) from None

    def announce(url: str, token: str) -> None:
        err.print(f"gateway for [bold]{model}[/bold] on {url}  (Ctrl-C to stop)")
        err.print(f"  OpenAI-style clients:    base URL {url}/v1   API key {token}")
        err.print(f"  Anthropic-style clients: base URL {url}      API key {token}")
        err.print(f"  Gemini-style clients:    base URL {url}      API key {token}")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        meter = await serve(model, host=host, port=port, models=registry, prices=book,
                            budget=Budget(max_usd=max_usd, max_tokens=max_tokens, max_calls=max_calls),
                            out=out, announce=announce, on_call=lambda line: err.print(line), stop=stop)
        u = meter.usage
        err.print(f"{len(meter.calls)} calls; tokens in={u.input} out={u.output} "
                  f"cache_write={u.cache_creation} cache_read={u.cache_read}; "
                  f"USD {meter.cost_usd if meter.cost_usd is not None else 'n/a'}")

    try:
        asyncio.run(main())
    except (ModelConfigError, PricingError, LocalModelError) as e:  # e.g. --max-usd for an
        # unpriced model, a local model whose server did not start
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def register(app: typer.Typer) -> None:
    app.add_typer(gateway_app, name="gateway")
