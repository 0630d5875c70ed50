"""Retrying flaky calls with exponential backoff and jitter."""
from __future__ import annotations

import functools
import logging
import random
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


class RetryError(Exception):
    def __init__(self, attempts: int, last: BaseException):
        super().__init__(f"gave up after {attempts} attempts: {last}")
        self.attempts = attempts
        self.last = last


@dataclass
class Backoff:
    base: float = 0.1
    factor: float = 2.0
    maximum: float = 5.0
    jitter: float = 0.1

    def delay(self, attempt: int) -> float:
        wait = min(self.maximum, self.base * self.factor ** attempt)
        return wait + random.uniform(0, self.jitter * wait)


def retry_call(func: Callable[[], T], attempts: int = 3, backoff: Backoff | None = None,
               retry_on: tuple[type[BaseException], ...] = (Exception,),
               sleep: Callable[[float], None] = time.sleep) -> T:
    backoff = backoff or Backoff()
    last: BaseException | None = None
    for attempt in range(attempts):
        try:
            return func()
        except retry_on as exc:
            last = exc
            if attempt + 1 == attempts:
                break
            wait = backoff.delay(attempt)
            log.warning("attempt %d failed (%s); retrying in %.2fs", attempt + 1, exc, wait)
            sleep(wait)
    raise RetryError(attempts, last)


def retrying(attempts: int = 3, backoff: Backoff | None = None,
             retry_on: tuple[type[BaseException], ...] = (Exception,)):
    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            return retry_call(lambda: func(*args, **kwargs), attempts, backoff, retry_on)
        return wrapper
    return decorate


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    status = getattr(exc, "status", None)
    return status in (429, 502, 503, 504)
