"""What mxhorovod's tests and benchmarks share, for this repository only (not shipped).

- :mod:`.mpirun`: run a worker script on N ranks under the venv's mpirun, with a timeout.
- :mod:`.hang_report`: what the processes of a timed-out job were doing.
- :mod:`.netns_hosts`: hosts made of Linux network namespaces, for multi-host runs on one
  machine.
- :mod:`.slurm_cluster`: a real Slurm cluster (slurmctld, one slurmd per namespace host).
- :mod:`.elastic_hosts`: hosts for the elastic driver, each with a private commit directory.

Installed editable by scripts/setup_venv.sh, so that ``python benchmarks/x.py`` and pytest
import it without any path edits.
"""
