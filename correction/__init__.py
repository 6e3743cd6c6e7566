"""Pure math for the train-inference gap: correction strategies and gap diagnostics.

Depends on numpy and torch only: no config objects, no I/O, no distributed calls.
"""
