"""Telemetry: typed events, the emitter and its sinks (events.jsonl, Redis Stream). Torch-free."""

from trainer.telemetry.emitter import EventEmitter, open_emitter
from trainer.telemetry.events import EVENT_TYPES, Event, make_event
from trainer.telemetry.jsonl import JsonlSink, iter_events, read_events

__all__ = ["EVENT_TYPES", "Event", "EventEmitter", "JsonlSink", "iter_events", "make_event", "open_emitter",
           "read_events"]
