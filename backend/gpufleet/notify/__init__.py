"""Notifications: users' webhooks, what is sent to them, and the outbox that sends it.

- ``events``: which ``training_events`` rows are notifications, and their names;
- ``messages``: the bodies (generic JSON, or Slack/Mattermost ``{"text": ...}``) and the HMAC signature;
- ``hooks``: a user's own webhooks (create, list, change, remove), URL checks;
- ``outbox``: reading ``training_events`` into deliveries, and sending them with retries.
"""
