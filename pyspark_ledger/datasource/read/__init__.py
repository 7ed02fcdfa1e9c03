"""The read room: planning a batch read and turning stored entries into Arrow rows."""
