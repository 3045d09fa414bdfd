"""Watch a running server's metrics for a while and keep the intervals as a DataFrame.

    python examples/watch_to_dataframe.py URL [SECONDS] [INTERVAL]

Each interval is one dict (steps per second, tokens and sequences per step, the host-exposed
share with its basis and interval); the watch is stored as a run when it ends.
Needs pandas (``pip install 'hostgap[pandas]'``).
"""

import sys

import hostgap

url = sys.argv[1]
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
interval = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
with hostgap.watch(url, interval=interval, duration=seconds, store=False) as watch:
    for row in watch:
        print(f"{row['t_rel_s'] + row['interval_s']:6.1f} s  host share {row['host_share']}  ({row['status']})")
frame = watch.intervals.to_pandas()
print(frame[["steps_per_s", "seqs_per_step", "host_share"]].describe().round(3).to_string())
