"""What the tenants app does when a person's standing changes outside its services (the
Django admin, a shell, single sign-on): an `admin` API token dies with its user's platform-admin
standing."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models.signals import m2m_changed, post_save
from django.dispatch import receiver

from tenants.services.tokens import void_admin_tokens_of_former_admin

User = get_user_model()
STANDING_FIELDS = {"is_staff", "is_superuser", "is_active"}


@receiver(post_save, sender=User, dispatch_uid="tenants.admin_tokens.user_saved")
def _user_saved(sender, instance, created, update_fields=None, **kwargs):
    if created or (update_fields is not None and not STANDING_FIELDS & set(update_fields)):
        return  # a new person holds no token; a sign-in's last_login changes no standing
    void_admin_tokens_of_former_admin(instance)


@receiver(m2m_changed, sender=User.groups.through, dispatch_uid="tenants.admin_tokens.groups")
def _groups_changed(sender, instance, action, reverse, pk_set, **kwargs):
    if action not in ("post_remove", "post_clear"):
        return
    if not reverse:  # user.groups.remove(group)
        void_admin_tokens_of_former_admin(instance)
    elif pk_set:  # group.user_set.remove(user, ...)
        for user in User.objects.filter(pk__in=pk_set):
            void_admin_tokens_of_former_admin(user)
