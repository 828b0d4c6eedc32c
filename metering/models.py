# Usage samples, rollups and statements arrive with the metering issue.
