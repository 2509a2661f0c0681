"""The one 4xx (and the rare 5xx) every app raises when a request cannot be served.

It lives here, below every app, so that API, form and page code of any app can raise and catch
it without importing another app's module. Every API answers it with the one documented body,
`{"error": code, "field": field, "message": message}` (see README "Errors").
"""

from __future__ import annotations


class FieldError(Exception):
    """A rejected request. `field` is a dotted path into the payload, e.g. samples.power_w[3],
    or the name of the header, query parameter or form field at fault; None when no one field is."""

    def __init__(self, status: int, code: str, field: str | None, message: str, *,
                 retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field
        self.message = message
        self.retry_after_s = retry_after_s  # sent as Retry-After (429, 503)

    def as_dict(self) -> dict:
        return {"error": self.code, "field": self.field, "message": self.message}


def invalid(field: str, message: str) -> FieldError:
    """The common case: a 422 naming the field whose value is wrong."""
    return FieldError(422, "validation_error", field, message)
