"""san-web: the web backend of the san product and a page that shows a job live."""
