"""Schemathesis hooks for lagbridge's quota protocol.

Some rules of docs/quota-protocol.yaml are written in its prose because
JSON Schema cannot say them; these hooks teach them to the generator, so
that a request the spec calls valid is one the daemon must accept:

- a report lists each topic at most once, and a consumer report each
  partition of a topic at most once (uniqueItems compares whole objects,
  not one field of them);
- a consumer report holds at most 512 partitions in all, and a NATS
  consumer's have partition 0 (a stream has one);
- a consumer report's partition gives heldMs (other than 0) only with
  held (other than 0);
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


def _key(v):
    # 5 and 5.0 are one integer to the daemon, as to JSON Schema.
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return repr(v)


def _unique(values):
    keys = [_key(v) for v in values]
    return len(keys) == len(set(keys))


def _valid_topics(body):
    """The rules above on a report's or consumer report's topics."""
    if not isinstance(body, dict) or not isinstance(body.get("topics"), list):
        return True
    topics = [t for t in body["topics"] if isinstance(t, dict)]
    if not _unique(t["topic"] for t in topics if "topic" in t):
        return False
    total = 0
    for t in topics:
        parts = [p for p in t.get("partitions") or [] if isinstance(p, dict)] if isinstance(t.get("partitions"), list) else []
        total += len(parts)
        if not _unique(p["partition"] for p in parts if "partition" in p):
            return False
        if body.get("kind") == "nats" and any(p.get("partition", 0) != 0 for p in parts):
            return False
        if any(p.get("heldMs", 0) != 0 and p.get("held", 0) == 0 for p in parts):
            return False
    return total <= 512


def _short_timeout(query):
    if not isinstance(query, dict) or not isinstance(query.get("timeout"), str):
        return True
    seconds = _seconds(query["timeout"])
    return seconds is None or seconds <= 60


# Fuzzing applies filter_body and filter_query while it generates; the
# coverage phase applies filter_case to what it built.
@schemathesis.hook
def filter_body(ctx, body):
    return _valid_topics(body)


@schemathesis.hook
def filter_query(ctx, query):
    return _short_timeout(query)


@schemathesis.hook
def filter_case(ctx, case):
    return _valid_topics(case.body) and _short_timeout(case.query)
