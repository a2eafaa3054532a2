"""Upstream models: what the gateway calls for a configured model name.

A models TOML file names each model:

```toml
[models."qwen3-coder"]
base_url = "https://dashscope.aliyuncs.com/compatible-mode/v1"
wire_api = "chat"                 # what the upstream speaks (others are translated)
key_env = "DASHSCOPE_API_KEY"     # host environment variable holding the key
price_key = "dashscope/qwen3-coder-plus"
upstream_model = "qwen3-coder-plus"   # sent upstream; defaults to the name after 'provider/'
```

Without a file, ``provider/model`` names resolve through the built-in providers below,
``scripted/<policy>`` (all four APIs) or ``scripted-chat/<policy>`` (Chat Completions only) name
the in-process scripted model, and ``local/<model>`` a GGUF that the gateway serves itself with a
llama.cpp server it starts (gateway/localmodels.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentmeter.gateway.scripted.policy import Policy, PolicyError
from agentmeter.records import ModelSpec, WireApi
from agentmeter.tomlfile import read_toml


class ModelConfigError(ValueError):
    pass


#: how a model is asked for output that follows a JSON schema (constrained decoding), used for
#: the harness's judge calls (runner/judging.py): ``llamacpp``: ``response_format = {"type":
#: "json_object", "schema": S}`` (llama-cpp-python's server, which turns it into a grammar, and
#: llama.cpp's own ``llama-server``); ``openai``: ``response_format = {"type": "json_schema",
#: "json_schema": {"name", "schema": S}}`` (OpenAI-compatible servers that support it: vLLM,
#: Ollama, many hosted providers; set it per model in a models file). None: never sent.
StructuredOutput = Literal["llamacpp", "openai"]


class UpstreamModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    base_url: str = Field(description="ends before the API path, e.g. https://api.openai.com/v1; "
                                      "'scripted' for the in-process scripted model")
    wire_api: WireApi = "chat"
    extra_wire_apis: tuple[WireApi, ...] = Field(default=(), description="also spoken natively")
    key_env: str | None = None
    price_key: str | None = None
    upstream_model: str | None = None
    local: bool = Field(default=False, description="a server of this machine (llama.cpp, ollama, "
                        "vllm): a call whose client hung up is cancelled upstream (it would "
                        "keep the server busy for nobody), not read to its end as for a paid "
                        "provider")
    structured_output: StructuredOutput | None = Field(
        default=None, description="how the model is asked for a reply that follows a JSON "
        "schema (judge calls): 'llamacpp' or 'openai'; none: never asked")
    max_output_tokens: int | None = Field(
        default=None, gt=0, description="the output a request without a cap may have: reserved "
        "against a token or USD budget and then sent upstream as its cap (default 32768; set it "
        "for a model whose own maximum is lower)")

    @property
    def scripted(self) -> bool:
        return self.base_url == "scripted"

    @model_validator(mode="before")
    @classmethod
    def _served_here_is_local(cls, data: Any) -> Any:
        """A model the gateway serves itself (``base_url = "local"``) is a local server, a
        llama-cpp-python one (constrained decoding: ``structured_output = "llamacpp"``)."""
        if isinstance(data, dict) and data.get("base_url") == "local":
            return {"local": True, "structured_output": "llamacpp", **data}
        return data

    @property
    def served_here(self) -> bool:
        """A ``local/<model>``: served by a llama.cpp server that the gateway starts."""
        # localmodels.LOCAL_BASE_URL, as in the validator above: not imported here on each
        # call (read once per request; localmodels stays out of the CLI's start-up)
        return self.base_url == "local"

    @property
    def wire_apis(self) -> tuple[WireApi, ...]:
        return (self.wire_api, *self.extra_wire_apis)

    @property
    def model_id(self) -> str:
        """The model name sent upstream."""
        if self.upstream_model:
            return self.upstream_model
        return self.name.split("/", 1)[1] if "/" in self.name else self.name

    def spec(self) -> ModelSpec:
        return ModelSpec(name=self.name, wire_api=self.wire_api, price_key=self.price_key)


class Provider(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str
    wire_api: WireApi = "chat"
    extra_wire_apis: tuple[WireApi, ...] = ()
    key_env: str | None = None
    price_prefix: str | None = Field(default=None, description="the price key's provider, when "
                                     "not the provider's own name (``gemini/x`` → ``google/x``)")
    local: bool = False  # see ``UpstreamModel.local``
    structured_output: StructuredOutput | None = None  # see ``UpstreamModel.structured_output``


BUILTIN_PROVIDERS: dict[str, Provider] = {
    "openai": Provider(base_url="https://api.openai.com/v1", wire_api="responses",
                       extra_wire_apis=("chat",), key_env="OPENAI_API_KEY"),
    "anthropic": Provider(base_url="https://api.anthropic.com/v1", wire_api="messages",
                          key_env="ANTHROPIC_API_KEY"),
    "gemini": Provider(base_url="https://generativelanguage.googleapis.com/v1beta",
                       wire_api="gemini", key_env="GEMINI_API_KEY", price_prefix="google"),
    "openrouter": Provider(base_url="https://openrouter.ai/api/v1", key_env="OPENROUTER_API_KEY"),
    "deepseek": Provider(base_url="https://api.deepseek.com/v1", key_env="DEEPSEEK_API_KEY"),
    "dashscope": Provider(base_url="https://dashscope-intl.aliyuncs.com/compatible-mode/v1",
                          key_env="DASHSCOPE_API_KEY"),
    "moonshot": Provider(base_url="https://api.moonshot.ai/v1", key_env="MOONSHOT_API_KEY"),
    "zhipu": Provider(base_url="https://open.bigmodel.cn/api/paas/v4", key_env="ZHIPU_API_KEY"),
    "minimax": Provider(base_url="https://api.minimax.io/v1", key_env="MINIMAX_API_KEY"),
    "vllm": Provider(base_url="http://127.0.0.1:8000/v1", local=True),
    "llamacpp": Provider(base_url="http://127.0.0.1:8080/v1", local=True,
                         structured_output="llamacpp"),
    "ollama": Provider(base_url="http://127.0.0.1:11434/v1", local=True),
}
#: servers a user starts (unpriced unless a snapshot prices them); ``local/`` models are started
#: by agentmeter itself (gateway/localmodels.py) and priced at zero
_LOCAL = {"vllm", "llamacpp", "ollama"}


class ModelRegistry:
    """Configured models by name; unknown ``provider/model`` names fall back to built-ins."""

    def __init__(self, models: dict[str, UpstreamModel] | None = None) -> None:
        self.models: dict[str, UpstreamModel] = dict(models or {})

    @classmethod
    def load(cls, path: Path) -> ModelRegistry:
        data = read_toml(path, ModelConfigError)
        raw = data.get("models", {})
        if not isinstance(raw, dict):
            raise ModelConfigError(f"{path}: field models: must be a table of models")
        out: dict[str, UpstreamModel] = {}
        for name, fields in raw.items():
            if not isinstance(fields, dict):
                raise ModelConfigError(f"{path}: field models.{name}: must be a table")
            try:
                out[name] = UpstreamModel.model_validate({"name": name, **fields})
            except ValidationError as e:
                detail = e.errors()[0]
                where = ".".join(str(p) for p in detail["loc"])
                raise ModelConfigError(
                    f"{path}: field models.{name}{'.' + where if where else ''}: {detail['msg']}"
                ) from e
        return cls(out)

    def add(self, model: UpstreamModel) -> None:
        self.models[model.name] = model

    def resolve(self, name: str) -> UpstreamModel:
        if name in self.models:
            return self.models[name]
        prefix, sep, rest = name.partition("/")
        if not sep or not rest:
            raise ModelConfigError(f"unknown model {name!r}: use provider/model or a models file")
        if prefix in ("scripted", "scripted-chat"):
            try:
                Policy.parse(rest)
            except PolicyError as e:
                raise ModelConfigError(str(e)) from e
            apis: tuple[WireApi, ...] = (("responses", "messages", "gemini")
                                         if prefix == "scripted" else ())
            return UpstreamModel(name=name, base_url="scripted", wire_api="chat",
                                 extra_wire_apis=apis, price_key=name)
        if prefix == "local":
            return _local_model(name, rest)
        provider = BUILTIN_PROVIDERS.get(prefix)
        if provider is None:
            raise ModelConfigError(
                f"unknown model {name!r}: provider {prefix!r} is not built in "
                f"({', '.join(sorted([*BUILTIN_PROVIDERS, 'local']))}); add it to a models file")
        return UpstreamModel(name=name, base_url=provider.base_url, wire_api=provider.wire_api,
                             extra_wire_apis=provider.extra_wire_apis, key_env=provider.key_env,
                             local=provider.local, structured_output=provider.structured_output,
                             price_key=None if prefix in _LOCAL else
                             f"{provider.price_prefix or prefix}/{rest}")


def _local_model(name: str, rest: str) -> UpstreamModel:
    """``local/<model>``: installed (package or own GGUF) and with its server installed."""
    from agentmeter.gateway import localmodels

    if not localmodels.NAME_PATTERN.match(rest):
        raise ModelConfigError(f"unknown model {name!r}: a local model's name is letters, digits, "
                               "'.', '_' and '-'")
    try:
        localmodels.find(rest)
    except localmodels.LocalModelError as e:
        raise ModelConfigError(str(e)) from e
    return UpstreamModel(name=name, base_url=localmodels.LOCAL_BASE_URL, wire_api="chat",
                         price_key=name, upstream_model=rest, local=True,
                         structured_output="llamacpp")
