"""Small pieces every program of the project needs (job-service, ai-gateway, san-web,
jobsctl) that belong to none of them: text made safe for logs and terminals
(`safe_text`, standard library only) and SQLite files created private
(`sqlite_files`, with SQLAlchemy's URL parser). A program imports these instead of
another program's package."""
