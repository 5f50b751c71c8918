"""Wiring: settings → store → engine → app. The one module that knows every stage."""

from __future__ import annotations

import logging
import os
import resource
import sys
import time
from typing import Any

from . import __version__
from .config import Settings, ensure_home
from .engine import Engine
from .serve.app import create_app
from .serve.chat import ChatService
from .store import Store

log = logging.getLogger("clawd")


def setup_logging(settings: Settings) -> None:
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    root.setLevel(settings.log_level.upper())
    for h in list(root.handlers):
        root.removeHandler(h)
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(fmt)
    root.addHandler(err)
    log_path = settings.home / "clawd.log"
    fd = os.open(log_path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600)
    os.close(fd)
    fh = logging.FileHandler(log_path)
    fh.setFormatter(fmt)
    root.addHandler(fh)


class Daemon:
    def __init__(self, settings: Settings):
        self.settings = settings
        ensure_home(settings.home)
        self.store = Store(settings.home / "clawd.db")
        interrupted = self.store.recover_interrupted()
        if interrupted:
            log.warning("%d turn(s) were cut off by a previous stop; marked aborted", interrupted)
        self.engine = Engine(settings.resolved_model(), n_ctx=settings.ctx, threads=settings.threads,
                             batch=settings.batch, gpu_layers=settings.gpu_layers)
        self.chat = ChatService(self.engine, self.store, settings)
        self.started = time.time()

    def status(self) -> dict[str, Any]:
        rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return {
            "version": __version__,
            "up": True,
            "uptime_s": round(time.time() - self.started, 1),
            "model": {"id": self.settings.model_id, "path": str(self.engine.model_path), "context": self.engine.n_ctx,
                      "trained_context": self.engine.n_ctx_train, "load_s": round(self.engine.load_seconds, 2)},
            "device": "cpu",
            "adapter": None,
            "turns": self.store.counts(),
            "in_flight": self.chat.in_flight,
            "peak_rss_mb": round(rss_kb / 1024, 1),
            "home": str(self.settings.home),
        }

    def app(self):
        return create_app(self)


def serve(settings: Settings) -> None:
    settings.check_bind()
    ensure_home(settings.home)
    setup_logging(settings)
    log.info("clawd %s starting with settings %s", __version__, settings.public())
    daemon = Daemon(settings)
    import uvicorn

    log.info("listening on http://%s:%d/v1 (model id %r)", settings.host, settings.port, settings.model_id)
    uvicorn.run(daemon.app(), host=settings.host, port=settings.port, log_level="warning", access_log=False)
