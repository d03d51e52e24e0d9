"""The built-in verifier kinds, one module each (a family may declare several names); each declares
``SPECS`` and is listed in conductor/verifiers/registry.py's BUILTIN_MODULES."""
