"""Schemathesis hooks for lagbridge's quota protocol.

Two rules of docs/quota-protocol.yaml are written in its prose because JSON
Schema cannot say them; these hooks teach them to the generator, so that a
request the spec calls valid is one the daemon must accept:

- a report lists each topic at most once (uniqueItems compares whole
  objects, not one field of them);
- the long-poll's timeout is at most 60s (a Go duration is a string, and a
  pattern cannot bound its value).

Nothing else is filtered: every other generated request, valid or not, is
sent as generated.
"""
import re

import schemathesis

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")


def _seconds(duration):
    """The value of a Go duration in seconds, or None if it is not one."""
    if duration == "0":
        return 0.0
    parts = _PART.findall(duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        return None
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _unique_topics(body):
    if not isinstance(body, dict) or not isinstance(body.get("topics"), list):
        return True
    names = [repr(t.get("topic")) for t in body["topics"] if isinstance(t, dict) and "topic" in t]
    return len(names) == len(set(names))


def _short_timeout(query):
    if not isinstance(query, dict) or not isinstance(query.get("timeout"), str):
        return True
    seconds = _seconds(query["timeout"])
    return seconds is None or seconds <= 60


# Fuzzing applies filter_body and filter_query while it generates; the
# coverage phase applies filter_case to what it built.
@schemathesis.hook
def filter_body(ctx, body):
    return _unique_topics(body)


@schemathesis.hook
def filter_query(ctx, query):
    return _short_timeout(query)


@schemathesis.hook
def filter_case(ctx, case):
    return _unique_topics(case.body) and _short_timeout(case.query)
