"""PyFlink operators wrapping privstream's core sketches and releases (``privstream.operators``)."""
