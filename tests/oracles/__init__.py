"""Independent oracles of the tests: small readers of the raw inputs that import nothing of gpuscope, so that what
they compute can be held against gpuscope's answers (collectives.py: the facts of real multi-rank jobs;
occupancy_oracle.cpp: the CUDA occupancy calculator)."""
