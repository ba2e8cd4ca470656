"""Test harness shared by every part's tests: real servers started on 127.0.0.1."""
