"""The write room: turning a task's rows into entries and committing them to logs."""
