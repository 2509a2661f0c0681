"""Pages of the alerts app, mounted under /teams/<slug>/ by greenops/urls.py."""

from django.urls import path

from greenops.alerts import views

urlpatterns = [
    path("alerts/", views.rule_list, name="alert-list"),
    path("alerts/new/", views.rule_new, name="alert-rule-new"),
    path("alerts/<int:rule_id>/", views.rule_detail, name="alert-rule"),
    path("alerts/<int:rule_id>/edit/", views.rule_edit, name="alert-rule-edit"),
    path("alerts/<int:rule_id>/delete/", views.rule_delete, name="alert-rule-delete"),
    path("alerts/<int:rule_id>/silence/", views.rule_silence, name="alert-rule-silence"),
    path("alerts/channels/", views.channel_list, name="alert-channels"),
    path("alerts/channels/new/", views.channel_new, name="alert-channel-new"),
    path("alerts/channels/<int:channel_id>/test/", views.channel_test, name="alert-channel-test"),
    path("alerts/channels/<int:channel_id>/tests/<int:notification_id>/",
         views.channel_test_status, name="alert-channel-test-status"),
    path("alerts/channels/<int:channel_id>/enable/", views.channel_enable,
         name="alert-channel-enable"),
    path("alerts/channels/<int:channel_id>/delete/", views.channel_delete,
         name="alert-channel-delete"),
]
