"""The models file and the built-in providers."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentmeter.gateway import BUILTIN_PROVIDERS, Gateway, ModelConfigError, ModelRegistry
from agentmeter.pricing import PriceBook


def test_models_file(tmp_path: Path) -> None:
    f = tmp_path / "models.toml"
    f.write_text("""
[models."qwen3-coder"]
base_url = "https://dashscope-intl.aliyuncs.com/compatible-mode/v1"
wire_api = "chat"
key_env = "DASHSCOPE_API_KEY"
price_key = "dashscope/qwen3-coder-plus"
upstream_model = "qwen3-coder-plus"
""")
    m = ModelRegistry.load(f).resolve("qwen3-coder")
    assert m.wire_apis == ("chat",) and m.model_id == "qwen3-coder-plus"
    assert m.spec().price_key == "dashscope/qwen3-coder-plus"


def test_models_file_errors_name_file_and_field(tmp_path: Path) -> None:
    f = tmp_path / "models.toml"
    f.write_text('[models.m]\nbase_url = "http://x"\nwire_api = "grpc"\n')
    with pytest.raises(ModelConfigError, match=r"models.toml: field models.m.wire_api"):
        ModelRegistry.load(f)


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini", "openrouter", "deepseek",
                                      "dashscope", "moonshot", "zhipu", "minimax", "vllm",
                                      "llamacpp", "ollama"])
def test_builtin_providers(provider: str) -> None:
    m = ModelRegistry().resolve(f"{provider}/some-model")
    assert m.base_url == BUILTIN_PROVIDERS[provider].base_url and m.model_id == "some-model"
    assert (m.key_env is None) == (provider in ("vllm", "llamacpp", "ollama"))


def test_gemini_provider_speaks_gemini_and_prices_as_google() -> None:
    m = ModelRegistry().resolve("gemini/gemini-2.5-pro")
    assert m.wire_api == "gemini" and m.key_env == "GEMINI_API_KEY"
    assert m.base_url == "https://generativelanguage.googleapis.com/v1beta"
    assert m.price_key == "google/gemini-2.5-pro" and m.model_id == "gemini-2.5-pro"
    assert PriceBook().quote(m.price_key) is not None  # genai-prices knows Google's prices


def test_scripted_names_and_unknowns() -> None:
    reg = ModelRegistry()
    assert reg.resolve("scripted/solver").wire_apis == ("chat", "responses", "messages", "gemini")
    assert reg.resolve("scripted-chat/explorer-3").wire_apis == ("chat",)
    for bad in ("scripted/nope", "gpt-5", "acme/x"):
        with pytest.raises(ModelConfigError):
            reg.resolve(bad)


def test_missing_key_env_fails_at_open(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    gw = Gateway(ModelRegistry(), PriceBook())
    with pytest.raises(ModelConfigError, match="DEEPSEEK_API_KEY"):
        gw.open_trial("t", "deepseek/deepseek-chat")
