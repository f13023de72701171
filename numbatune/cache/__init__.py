"""The tune cache: results in memory and on disk, and whole-cache files for shipping."""
