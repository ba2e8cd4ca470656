"""The crawl frontier: a Scrapy scheduler over a shared backend (Redis for a cluster, SQLite on one machine)."""
