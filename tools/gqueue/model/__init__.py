"""Pure data: patches, series, pins, drift outcomes. No git, no subprocess, no click."""
