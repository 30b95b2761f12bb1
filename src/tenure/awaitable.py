"""The `a…` twins of blocking methods, made once: for async handlers, the same method run on a
thread (`on_a_thread`) or, where nothing blocks, called at once (`at_once`). Signatures and
types are the blocking method's: mypy checks a call of the twin as a call of the original."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


def on_a_thread(
    method: Callable[Concatenate[S, P], R],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """`method` for async handlers: run with `asyncio.to_thread`, so the loop never blocks."""

    async def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, self, *args, **kwargs)

    twin.__doc__ = f"`{method.__name__}` for async handlers."
    return twin


def at_once(
    method: Callable[Concatenate[S, P], R],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """`method` for async handlers, called on the loop (it does not block)."""

    async def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(self, *args, **kwargs)

    twin.__doc__ = f"`{method.__name__}` for async handlers."
    return twin
