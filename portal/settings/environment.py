"""Where the settings' values come from: the environment, after the checkout's .env (which
never overrides what the environment already says)."""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)
