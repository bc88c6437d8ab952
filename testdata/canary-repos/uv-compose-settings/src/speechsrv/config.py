from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Config(BaseSettings):
    model_config = SettingsConfigDict(env_nested_delimiter="__")

    api_key: SecretStr | None = None
    chat_completion_api_key: SecretStr = SecretStr("cant-be-empty")
    log_level: str = "info"
    enable_ui: bool = True


def get_config() -> Config:
    return Config()
