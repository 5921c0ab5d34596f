"""Offline use of the demo engine from a script, the way the seed's DiffGenerator example works.

``Engine`` below is a lazy proxy: binding it at the top of the script imports
nothing.  That matters because ``spawn`` re-runs this file's top level in
every worker (as ``__mp_main__``) *before* the worker has loaded its plugins;
a real import of the engine there would pull the hook targets in early, and
spawnkit's import guard would stop the worker.  Everything that really uses
the engine sits under ``if __name__ == "__main__":``, which workers skip.

    python examples/offline_script.py
"""

from spawnkit.demo import Engine  # a proxy: imports nothing yet

if __name__ == "__main__":
    engine = Engine.from_pretrained(model_path="spawnkit-demo/tiny-mlp", dp_size=2)
    run = engine.run()
    for result in run.results:
        print(
            f"rank {result['rank']}: {len(result['checksums'])} requests on "
            f"{result['platform']} ({result['device']}), {result['tokens_per_s']:.0f} tokens/s, "
            f"scheduler {result['scheduler_class']}"
        )
    print(f"hooks applied in rank 0: {', '.join(run.reports[0].hooks) or 'none'}")
