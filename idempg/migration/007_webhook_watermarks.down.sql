DROP TABLE idem_webhook_watermarks;
