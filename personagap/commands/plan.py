"""`personagap plan`: how many more human labels a stage needs (issue 13)."""
