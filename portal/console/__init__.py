"""The platform console (`/console/`), pages for platform admins, on the same services as the
admin and the API: `approvals` (the queue of asks and the decisions), `views` (capacity, teams,
queues, reconcile health, the audit log, MIG plans), `gpu_health` (GPU health and its rules),
`sso` (the single sign-on mapping and its dry run); `urls` names them all `console:...`."""
