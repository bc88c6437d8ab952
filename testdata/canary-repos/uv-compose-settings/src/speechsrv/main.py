from speechsrv.config import get_config


def create_app():
    cfg = get_config()
    return {"ui": cfg.enable_ui}
