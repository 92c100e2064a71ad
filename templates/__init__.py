"""Jinja templates of the generated loops, and the verifiers they inline (data, read by rtc.render)."""
