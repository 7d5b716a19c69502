"""The hospital evaluation set's builder (scripts/build_hospital.py runs build.main): facts in data/, loaded by
world.py; documents rendered by render.py, questions by ask.py, tool questions and collection runs by tools.py."""
