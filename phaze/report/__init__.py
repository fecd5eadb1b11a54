"""Tables and figures from results: validation against measured runs, and (later) study reports."""
