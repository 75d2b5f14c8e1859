"""The adversarial benchmark's parts (``bench/run_adversarial.py``): instances, the targets compared, the search."""
