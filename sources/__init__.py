"""What the Bytewax flow reads from: the partitions of the score topic, as record batches."""
