"""Reading WARC files (SEAMS §2) into bronze rows, without Spark."""
