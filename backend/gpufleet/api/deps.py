"""Dependencies shared by the routes, as Annotated aliases."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from gpufleet.config import Settings
from gpufleet.db.session import session_factory


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


def get_session(settings: SettingsDep) -> Iterator[Session]:
    sess = session_factory(settings)()
    try:
        yield sess
    finally:
        sess.close()


SessionDep = Annotated[Session, Depends(get_session)]
