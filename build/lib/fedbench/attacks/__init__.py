"""Privacy evaluations of what algorithms transmit (gradient leakage)."""
