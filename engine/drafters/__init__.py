"""Drafters propose target token ids for the target to verify, each behind one protocol
(`Drafter`, base.py) with the same counters: prompt lookup (lookup.py, reading the documents
through documents.py), the datastore of the target's own answers (datastore.py), the copy of a
region an edit model rewrites (copy.py), a draft model with the target's vocabulary (model.py)
and one with another tokenizer (text.py)."""
from .base import Draft, Drafter, Sampling
from .copy import CopyDrafter
from .datastore import Datastore, DatastoreDrafter
from .lookup import LookupDrafter
from .model import ModelDrafter
from .text import TextDrafter

__all__ = ["CopyDrafter", "Draft", "Drafter", "Sampling", "Datastore", "DatastoreDrafter", "LookupDrafter",
           "ModelDrafter", "TextDrafter"]
