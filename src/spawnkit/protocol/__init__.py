"""The parent <-> worker protocol of a local launch, readable in one package.

``popen`` is what the parent runs (the guarded command line, the bytes it
writes, the early-error pipe it reads); ``child`` is what the new interpreter
runs (it reads those bytes, runs the stages, answers on the report pipe);
``messages`` is what travels back and in which order.  docs/architecture.md
draws the exchange.

Nothing is imported here: the child's first statement imports
``spawnkit.bootstrap.guard`` and then ``spawnkit.protocol.child``, and must not
pay for the parent's half.
"""
